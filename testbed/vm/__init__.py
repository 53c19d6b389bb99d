"""Virtual machines for the testbed: the local Vagrant box and the VMs the tests make."""
