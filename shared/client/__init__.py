"""The kube-apiserver client side: the object client, the informer, leader election and Events."""
