"""Regression suites (``toolloop test``): suite files of cases over plans and their recorded
fixtures, each case a journaled run checked against what it expects.

- ``load.py`` reads and checks a suite file (findings with file, line and column; runs nothing,
  so ``validate`` uses it too); ``models.py`` its declaration types;
- ``fixture.py`` reads a ``runs export`` file; ``recorded.py`` is the replay recording a case runs
  from (tool results as ``tools`` says, faults laid over them);
- ``case.py`` runs one case through ``engine/launch.py``; ``expect.py`` judges a run (pure);
- ``runner.py`` runs suites into ``test`` and ``test_summary`` records; ``junit.py`` writes JUnit XML.
"""
