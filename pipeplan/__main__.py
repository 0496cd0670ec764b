"""``python -m pipeplan``: the ``pipeplan`` command, for where its console script is not on PATH."""

from pipeplan.entry import console

if __name__ == "__main__":
    console()
