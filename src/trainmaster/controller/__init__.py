"""The one loop: events -> snapshot -> policy -> plan -> actions -> engine."""
