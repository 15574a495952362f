"""How traffic arrives: addressing, authentication, the session gate (see README.md)."""
