"""``python -m pairht``: the ``pairht`` command (:func:`pairht.cli.main`)."""

from pairht.cli import main

if __name__ == "__main__":
    main()
