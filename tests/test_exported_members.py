import trainpace


def test_public_api_is_exactly_all():
    public = {name for name in dir(trainpace) if not name.startswith("_")}
    # subpackages show up as attributes once imported; they are not the API
    modules = {name for name in public if type(getattr(trainpace, name)).__name__ == "module"}
    assert public - modules == set(trainpace.__all__) - {"__version__"}
