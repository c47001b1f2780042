"""Every way of placing: deciders (plain, multi-cloud) behind one interface, one commit loop."""
