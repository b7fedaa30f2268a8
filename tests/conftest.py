"""Test-suite setup. The test files mirror the packages they specify (tests/<package>/test_<module>.py); helpers
shared by several (a fake Hub server, AppTest pages, HTML readers, replay plans, export cases) live here at the top of
tests/, which this file's folder puts on sys.path for every test file, wherever it sits."""
