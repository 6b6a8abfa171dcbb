"""Export: trained networks to the ONNX files, decoder Jacobian and manifest the add-on loads."""
