"""Other machines: SSH (paramiko), inventories, provisioning (Ansible)."""
