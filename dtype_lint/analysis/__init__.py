"""What the code says: the class index, class facts, layers, recognisers, guards, value flow, helper-shaped functions, one file's analysis."""
