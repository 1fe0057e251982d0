"""Query runners: one module per question, values bound server-side, a caller tag and a time limit on every query."""
