"""Command line entry point."""
def main(): print("hi")
