"""This xagents' version, importable from every layer (saved manifests record it)."""
__version__ = '2.3.1'
