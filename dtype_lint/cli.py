def main(argv=None):
    raise SystemExit("dtype-lint: CLI not wired yet")
