"""Results, reports and gates: the model the plugin fills, and everything that reads it.

- :mod:`.model`: :class:`Run`/:class:`Case` and the ``fabricqa-results/1`` JSON form (``write_json``, ``load_json``).
- :mod:`.html`: the self-contained qualification report (``render_html``, ``write_html``).
- :mod:`.terminal`: the end-of-run summary lines (``summary_lines``).
- :mod:`.compare`: protocol against protocol with trend percentages (``fabricqa-compare``).
- :mod:`.baseline`: finding, comparing with and saving baselines.

Modules are imported on use: matplotlib and jinja2 load only when a report is rendered.
"""
