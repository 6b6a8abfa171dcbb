"""Published figures and tables: PNG figures, README tables from committed files, and the
``results`` command that remakes every figure."""
