package toolenv
