"""Presentation: the console report, the HTML pages, and run comparison.

``console.print_report(summary)`` prints a run's report; ``run_html.run_page(...)`` builds its
HTML page from the shell and plot helpers of ``html``; ``compare.compare_runs(a, b)`` compares
two runs by time to target (by throughput when no target can decide).
"""
