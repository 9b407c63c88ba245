"""Making templates: the structural template, parameter spaces, expert templates."""
