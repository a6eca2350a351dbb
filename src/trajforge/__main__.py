from trajforge.cli.main import app

app()
