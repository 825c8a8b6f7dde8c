"""Where data lives, and the transfer engine that moves it."""
