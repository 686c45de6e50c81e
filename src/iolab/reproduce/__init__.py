"""`iolab reproduce`: the five reference studies in one command, one page of claims and verdicts.

plan.py (which study answers which reference), claims.py (the published claims and their
rules, pure), session.py (runs and resumes the studies), page.py (the report of a reproduction).
"""
