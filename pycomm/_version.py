"""pycomm's version: the one place it is written. pyproject.toml reads it
(setuptools' attr:, parsed without importing pycomm), ``pycomm.__version__``
is it, and ``pycomm doctor`` prints it."""
__version__ = "0.1.0"
