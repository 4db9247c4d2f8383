"""A tiny example App for toolloop: each tool shows one kind of callable."""
