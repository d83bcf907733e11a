from cognate.cli import run

run()
