"""The package's version (read by setup.cfg, printed by the device line and stored in reports)."""
__version__ = "0.3.0"
