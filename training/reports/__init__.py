"""Published figures and tables: PNG figures, the docs' tables from committed files, and the
``results`` command that remakes every figure."""
