"""Makes ``tests`` importable from every test folder (``from tests.factories import ...``): pytest
puts this package's parent on ``sys.path`` when it loads this file."""
