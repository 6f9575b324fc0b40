// replaced by lib/mem sources
