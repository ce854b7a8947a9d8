"""What the tests share: the fork server, numpy references, fixtures and checks of
exported models, the README and docs reader, mutation strategies."""
