"""Pure policies: Snapshot -> Plan. They never import engines or the controller."""
