"""Running as one of our processes: settings from flags and the environment, logging, the clock,
the version, process metrics, giving freed heap back to the system (`memory`), and the probes
and uvicorn wrapper both servers use (`http`).
It imports the core and never a shell.
"""
