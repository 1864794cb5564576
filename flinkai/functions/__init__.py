"""The logic behind each SQL function, free of PyFlink so it is unit-testable."""
