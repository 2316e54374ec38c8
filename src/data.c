/* placeholder until implemented */
#include "vit/core.h"
