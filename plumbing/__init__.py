"""Process plumbing shared by the gateway and the workers; see README.md beside this file."""
