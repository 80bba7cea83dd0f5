"""Physics for design methods: computational homogenisation of periodic unit cells."""

from common.physics.homogenization import DEFAULT_MAXITER
from common.physics.homogenization import conductivity_tensor
from common.physics.homogenization import elastic_tensor
from common.physics.homogenization import element_matrix
from common.physics.homogenization import engineering_constants
from common.physics.homogenization import EngineeringConstants
from common.physics.homogenization import homogenize
from common.physics.homogenization import interpolate
from common.physics.homogenization import Material
from common.physics.homogenization import plane_stress
from common.physics.homogenization import PRECONDITIONERS
from common.physics.homogenization import Properties
from common.physics.homogenization import thermal_expansion
