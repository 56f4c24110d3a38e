"""Other libraries' environments played as Optima envs; each module imports its library only when
used, so `import optima_envs.integrations` needs none of them."""
