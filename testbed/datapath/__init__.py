"""The Linux datapath both the controller and the emulation touch: tc on interfaces."""
