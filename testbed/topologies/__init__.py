"""Fabric descriptions: the fat-tree spec (and, later, the Mininet topology built from it)."""
