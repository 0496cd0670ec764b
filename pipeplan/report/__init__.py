"""Presentation: terminal tables (rich) and figures (plotly). The core modules never import from here."""
