"""Presentation: the console report, the HTML pages, and the rendering of a comparison.

``console.print_report(summary)`` prints a run's report; ``run_html.run_page(...)`` builds its
HTML page from the shell of ``html`` and the charts of ``plots``; ``compare.print_comparison``
renders what :func:`trainpace.comparison.compare_runs` computed.
"""
