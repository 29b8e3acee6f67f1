"""The farm's commands: one module per verb.
"""
