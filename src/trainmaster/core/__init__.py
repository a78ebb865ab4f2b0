"""Domain types shared by every layer: resources, nodes, jobs, states, events, clocks."""
