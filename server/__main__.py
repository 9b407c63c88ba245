from .main import run_stdio

run_stdio()
