"""``doctor``: which wheel of an index fits a machine, and why each other one does not. ``probe`` reads the machine in
the user's own interpreter, ``wheels`` what each wheel declares, ``rules`` the judgement, ``diagnose`` the report;
``python -m ci.doctor`` runs it without the farm's tools.
"""
