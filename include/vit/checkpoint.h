#include "vit/core.h"
