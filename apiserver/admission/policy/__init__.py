"""The ValidatingAdmissionPolicy admission plugin and what it is built from: the compiled policies and
bindings, and the evaluation of one policy's CEL."""
