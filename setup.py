import os
import re
from pathlib import Path

from setuptools import find_packages, setup

here = Path(__file__).parent
version = re.search(r"__version__ = '([^']+)'", (here / 'xagents' / 'version.py').read_text()).group(1)


def requirements(extra: str | None = None) -> list[str]:
    """requirements.txt's lines: the run-time ones, or those marked ``# extra``."""
    found = []
    for line in (here / 'requirements.txt').read_text().splitlines():
        requirement, _, mark = (part.strip() for part in line.partition('#'))
        if requirement and (mark == extra if extra else not mark):
            found.append(requirement)
    return found


BACKEND_EXTRAS = ('jax', 'torch')
extras = {extra: requirements(extra) for extra in ('test', 'postgres', 'mysql', 'tensorboard', 'export', 'distributed',
                                                   'robotics', 'docs', *BACKEND_EXTRAS)}
# Not the other backends: TensorFlow imports JAX at its own start whenever JAX is installed (about 0.6 s of every
# TensorFlow run's launch here). `.[all,jax,torch]` installs all three.
extras['all'] = sorted({requirement for extra, group in extras.items() if extra not in BACKEND_EXTRAS
                        for requirement in group})
install_requires = requirements()
# KERAS_BACKEND=jax or torch while installing leaves TensorFlow out: `KERAS_BACKEND=jax pip install '.[jax]'`.
if os.environ.get('KERAS_BACKEND', 'tensorflow') in BACKEND_EXTRAS:
    install_requires = [requirement for requirement in install_requires if not requirement.startswith('tensorflow')]

setup(
    name='xagents',
    version=version,
    description='Deep reinforcement learning agents on Keras 3 (TensorFlow, JAX or PyTorch), from Python or a command',
    long_description=(here / 'README.md').read_text(encoding='utf-8'),
    long_description_content_type='text/markdown',
    license='MIT',
    python_requires='>=3.10',
    packages=find_packages(exclude=['xagents.tests', 'xagents.tests.*']),
    include_package_data=True,
    package_data={'xagents': ['*/models/*.cfg', '*/hyperparameters.json']},
    install_requires=install_requires,
    extras_require=extras,
    entry_points={'console_scripts': ['xagents=xagents.app.command:main']},
    classifiers=[
        'Programming Language :: Python :: 3',
        'License :: OSI Approved :: MIT License',
        'Topic :: Scientific/Engineering :: Artificial Intelligence',
    ],
)
