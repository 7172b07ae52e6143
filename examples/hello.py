def rectangle_area(width, height):
    """Return the area of a width x height rectangle."""
    return 


def is_even(n):
    return n % 2 == 


print(rectangle_area(3, 4))
