// Init_gvlscope: defines the Ruby-visible functions, nothing else.
#include "gvlscope.h"

RUBY_FUNC_EXPORTED void Init_gvlscope(void) {
    VALUE mGVLScope = rb_define_module("GVLScope");
    VALUE mNative = rb_define_module_under(mGVLScope, "Native");
    gvlscope_probe_init(mNative);
}
