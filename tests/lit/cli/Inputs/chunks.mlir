fusion.mesh @a shape = [4]
// -----
fusion.mesh @b shape = [4]
// -----
fusion.mesh @c shape = [4]
