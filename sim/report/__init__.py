"""The report: experiments to data, figures and markdown, with provenance."""
