"""The wire contract between jobgate's processes; see README.md beside this file."""
