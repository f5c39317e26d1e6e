"""Output for people and scripts: loading a saved result, the text views of ``show``,
and the HTML and Markdown report."""
