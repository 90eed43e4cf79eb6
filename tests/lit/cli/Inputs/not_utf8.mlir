fusion.mesh @tp shape = [4]
// café au lait
