import re
from pathlib import Path

from setuptools import find_packages, setup

here = Path(__file__).parent
version = re.search(r"__version__ = '([^']+)'", (here / 'xagents' / '__init__.py').read_text()).group(1)

setup(
    name='xagents',
    version=version,
    description='Deep reinforcement learning agents on TensorFlow 2, usable from Python or one command',
    long_description=(here / 'README.md').read_text(encoding='utf-8'),
    long_description_content_type='text/markdown',
    license='MIT',
    python_requires='>=3.10',
    packages=find_packages(),
    include_package_data=True,
    package_data={'xagents': ['*/models/*.cfg', '*/hyperparameters.json']},
    install_requires=[
        line.strip() for line in (here / 'requirements.txt').read_text().splitlines()
        if line.strip() and not line.startswith('#')
    ],
    entry_points={'console_scripts': ['xagents=xagents.cli:main']},
    classifiers=[
        'Programming Language :: Python :: 3',
        'License :: OSI Approved :: MIT License',
        'Topic :: Scientific/Engineering :: Artificial Intelligence',
    ],
)
