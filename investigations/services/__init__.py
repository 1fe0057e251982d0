"""State changes of the workspace, as verb functions. Views, API and tasks call these."""
