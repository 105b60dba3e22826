"""Speed measurements against their floors: ``kernels`` (the Falcon kernels beside their anchors)."""
