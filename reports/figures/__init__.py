"""Drawing: plots over eval rows (plots: accuracy vs compute, coverage vs k, tokens to solve;
PNG + SVG + the JSON of what is drawn), a search tree as one HTML page (viewer) or as data
(tree_export: networkx, GraphML). The demo's committed figures sit beside the code
(demo_*.png, prm_bon_demo.png), where README.md shows them from."""
