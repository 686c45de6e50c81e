"""Report documents built from stored runs and analyses: a run's results (store → its
study's analysis and presentation → sections), an A/B comparison, a study's history. Above
the studies it calls; the sections it builds are rendered by iolab.report (the document
model and one exporter per format) below (docs/architecture.md, "Import graph and layers")."""
